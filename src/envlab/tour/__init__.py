"""``envlab tour``: vet, train, measure and report in one short offline run (``run_tour``)."""
