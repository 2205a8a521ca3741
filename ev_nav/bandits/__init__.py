"""Bandit routing: index rules, rectification, Dijkstra and the Algorithm 1 agent."""
