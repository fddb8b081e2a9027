"""PySpark 4 data source for embedlog ledgers."""
