"""The schedule IR: collective definitions, schedules, the fabric they run on, and the verifier that proves them correct."""
