"""Budgets (runtime floor): the ledger every model call of a run is reserved
on and charged to, and the prices it charges by.
"""
