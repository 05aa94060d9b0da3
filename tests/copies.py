"""What a log's columnar copy (reports/columnar.py) says of itself, for tests that check one was left."""
import json

from hpclaunch.reports import columnar


def copy_meta(log) -> dict:
    """The description ``log``'s copy carries in its Arrow schema metadata."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with pa.memory_map(str(columnar.copy_path(log))) as mm:
        return json.loads(ipc.open_file(mm).schema.metadata[columnar.META_KEY])
