"""A local Spark (local[2], no UI, small shuffles) with "quiver" registered, for the Spark tests' module fixtures."""

from collections.abc import Iterator
from typing import Any


def local_spark(app: str) -> Iterator[Any]:
    import quiver.spark as qs
    s = qs.session("local[2]", app, **{"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                                       "spark.driver.memory": "1g"})
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()
