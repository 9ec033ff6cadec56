"""Quiver benchmarks: ratios against ceilings measured in the same run."""
