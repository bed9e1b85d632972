"""Training on traced graph executions (transitions → rewards → advantages → PPO). Nothing in
``graphs``, ``nodes`` or ``stores`` imports this package."""
