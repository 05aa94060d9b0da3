"""`hpclaunch schema`: the JSON Schema of job files or profiles, for editors.

A module of its own so that `validate` and `profiles` do not load `json` for it.
"""
from __future__ import annotations

import argparse
import json

from hpclaunch.spec.job import Job
from hpclaunch.spec.profile import Profile
from hpclaunch.spec.typedload import json_schema


def cmd_schema(args: argparse.Namespace) -> int:
    if args.profile:
        schema = json_schema(Profile, "hpclaunch cluster profile")
    else:
        schema = json_schema(Job, "hpclaunch job file")
    print(json.dumps(schema, indent=2, default=str))
    return 0
