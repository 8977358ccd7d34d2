"""Diagnosis: read a cluster and its EC2 side once, say what is wrong and which runbook fixes it.

``diagnose()`` (``scan.py``) returns a ``Report`` of ``Finding`` objects (``model.py``), each with
the evidence read, a severity, the runbook that applies with its params filled in, and a ready
command line. Read-only: it reaches clusters only through their clients, bound read-only.
"""

from bot.diagnose.model import Evidence, Finding, Report, Scope, Severity
from bot.diagnose.scan import Catalogue, catalogue_of, command_line, diagnose

__all__ = ["Catalogue", "Evidence", "Finding", "Report", "Scope", "Severity", "catalogue_of",
           "command_line", "diagnose"]
