"""The public record of FP8 block-scaled bugs as a test bed: each incident of ``data/incidents/`` reproduced
by the tool's own mechanics (a triage of a scenario, a planted capture pair, one op's held tensors) and its
diagnosis compared with what the file says the thread's root cause is.

>>> run = md.incidents.run_incident("sglang-28685")   # the negative control: a value fault, no layout story
>>> run.ok, run.triage.first_steps, run.capture.outcome
"""

from .diagnosis import CaptureDiagnosis, Check, OperandDiagnosis, TriageDiagnosis, VariantVerdict
from .record import Incident, IncidentFileError, Thread, incident_files, incident_names, incidents_folder, load_incident
from .run import IncidentRun, run_incident

__all__ = [
    "CaptureDiagnosis",
    "Check",
    "Incident",
    "IncidentFileError",
    "IncidentRun",
    "OperandDiagnosis",
    "Thread",
    "TriageDiagnosis",
    "VariantVerdict",
    "incident_files",
    "incident_names",
    "incidents_folder",
    "load_incident",
    "run_incident",
]
