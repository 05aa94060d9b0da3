"""The 'program' of the quoting test: writes the argv and environment it received as JSON."""
import json
import os
import sys

with open(os.environ["HL_RECORD"], "w", encoding="utf-8", errors="surrogateescape") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, f)
