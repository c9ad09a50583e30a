"""Bandwidth-optimal schedules: LP packing of spanning arborescences, made whole-chunk and staged into steps."""
