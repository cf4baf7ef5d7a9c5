"""Adapters: environments from other libraries (reasoning-gym, TextArena, gymnasium,
verifiers) as envlab specs; ``adapters.catalog`` lists them."""
