"""`mla-debug incidents`: the incidents of the public record shipped in data/incidents/, and `incidents run
NAME`: reproduce one with the tool's own mechanics and print the diagnosis beside what its thread reported
(exit status 1 when a field of the file's expected diagnosis does not hold)."""

from __future__ import annotations

import argparse
import json

from .common import add_actions, add_command
from .table import print_columns


def add_parser(sub) -> None:
    incidents = add_command(
        sub,
        "incidents",
        None,
        "the public record's FP8 incidents; `incidents run NAME` reproduces one and diagnoses it",
        "Incidents of the public record (vLLM, SGLang, aiter issues and pull requests) shipped as data in "
        "data/incidents/: each says what happened and how mla_debug reproduces it - a triage of a scenario, a "
        "planted capture pair, or one op's held tensors. `incidents run NAME` runs that reproduction and prints "
        "what mla_debug finds beside what the thread reported, then each field of the file's expected diagnosis.",
    )
    actions = add_actions(incidents, default=_cmd_list)
    add_command(actions, "list", _cmd_list, "the incidents (the default)", "Every shipped incident.")
    run = add_command(
        actions,
        "run",
        _cmd_run,
        "reproduce an incident and print its diagnosis beside the thread's",
        "Reproduce one incident (a name from `mla-debug incidents`, or an incident file) and print the diagnosis "
        "mla_debug derives beside what the thread reported. A triage reproduction takes from seconds to a few "
        "minutes on a CPU.",
    )
    run.add_argument("incident", metavar="NAME_OR_FILE", help="an incident name or a .yaml incident file")
    run.add_argument(
        "--only",
        choices=("triage", "capture", "operands"),
        action="append",
        help="run only this reproduction (repeatable; default: every one the file names)",
    )
    run.add_argument("--json", metavar="FILE", help="also write the diagnosis as JSON (never overwrites)")


def _cmd_list(args: argparse.Namespace) -> int:
    from ..incidents import incident_names, incidents_folder, load_incident
    from ..viz.incidents import incident_rows

    loaded = [load_incident(name) for name in incident_names()]
    print_columns(("incident", "engine", "platform", "model", "reproduced by"), incident_rows(loaded))
    print(f"\n{len(loaded)} incidents from {incidents_folder()}; `mla-debug incidents run NAME` reproduces one")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from ..incidents import run_incident
    from ..incidents.diagnosis import diagnosis_to_dict
    from ..viz.incidents import diagnosis_lines

    run = run_incident(args.incident, tuple(args.only) if args.only else None, progress=None)
    print("\n".join(diagnosis_lines(run)))
    if args.json:
        from .._files import write_atomically

        data = {
            "incident": run.incident.name,
            "ok": run.ok,
            "checks": [diagnosis_to_dict(c) for c in run.checks],
            **{
                k: diagnosis_to_dict(v)
                for k, v in (("triage", run.triage), ("capture", run.capture), ("operands", run.operands))
                if v is not None
            },
        }
        written = write_atomically(args.json, json.dumps(data, indent=2) + "\n")
        print(f"wrote {written}")
    return 0 if run.ok else 1
