"""Python tool environments written as a user would (``EnvSpec`` + ``ToolEnv`` + ``Rubric``):
clean ones of different shapes (``clean``) and one per flaw class ``envlab vet`` must find
(``flawed``). Used by ``tests/vet/test_python_gallery.py``."""
