"""The schema doctor: why a regex or schema gets a poor jump-forward speedup, where, and
what would change it. samples.py (outputs synthesized from the automaton), places.py
(JSON pointers and pattern spans), causes.py (each chosen token classified), what_if.py
(the advice applied and measured), timing.py (the ideal as time), report.py (`diagnose`
and the typed `DoctorReport`). Its renderers live in viz/ (summaries.doctor_md,
doctor_text.format_report)."""

from .report import DoctorReport, diagnose
from .samples import synthesize
from .timing import ideal_time
from .what_if import WHAT_IF_NOISE

__all__ = ["WHAT_IF_NOISE", "DoctorReport", "diagnose", "ideal_time", "synthesize"]
