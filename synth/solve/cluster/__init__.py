"""Cluster-scale synthesis: hierarchical schedules over identical hosts and AllToAll by multicommodity flow."""
