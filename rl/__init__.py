"""Benchmarks, evaluation and baselines, the reward, and training."""
