"""All-to-all-v split matrices for benchmarks: what an MoE layer's token routing looks like to the
communication library (uneven per-peer counts, some peers empty), drawn reproducibly."""

from __future__ import annotations

import random


def uneven_splits(total: int, world: int, rng: random.Random) -> list[list[int]]:
    """counts[source][destination] in elements: each row sums to ``total``, with entries from 0 to about twice
    the even share (one in four forced to 0, as routing leaves experts empty). Ranks that draw with the same
    seed get the same matrix, so every rank knows what it sends and what it receives."""
    matrix = []
    for _ in range(world):
        weights = [0.0 if rng.random() < 0.25 else rng.uniform(0.0, 2.0) for _ in range(world)]
        if not any(weights):
            weights[rng.randrange(world)] = 1.0
        scale = total / sum(weights)
        row = [int(weight * scale) for weight in weights]
        row[max(range(world), key=lambda i: weights[i])] += total - sum(row)
        matrix.append(row)
    return matrix
