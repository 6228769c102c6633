"""Cost-based placement (seed 000): the joint cost function and the strategies built on it."""
