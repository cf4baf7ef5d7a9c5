"""Importers of other task formats into task folders (Harbor's format): above ``envs``, they
write folders that ``envs.taskfolder`` reads and know nothing of how tasks run."""
