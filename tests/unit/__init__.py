"""Pure units and in-process checks: inventory, plan, strategy, parsers, the agent's functions,
hold frames."""
