"""Compensation after a partial failure: what a run's committed effects are (effects, the read
side), asking for and settling their compensations (models), the run page's section and the
API. The Compensation model itself is in runs/models/ledger.py; the compensation run's engine
part is runs/engine/compensating.py."""
