"""Imported first by the package: without PySpark, ``import spark_connector`` says which
extra installs it rather than failing deep inside a module that needs it."""

from embedlog.extras import require

require("spark", "the Spark connector (spark_connector)")
