"""The bundled example trainer and evaluator (examples/), run for real on loopback."""
