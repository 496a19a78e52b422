"""Agent spec files (YAML) that tests in more than one folder run."""

from __future__ import annotations


def solve_then_check(*, calculator: bool = False) -> str:
    """The pipeline ``solve_then_check``: ``solver`` ("You are the solver.")
    answers the task, then ``checker`` ("You are the checker.") checks its
    solution, which is the pipeline's answer.  ``calculator``: the solver
    is told to use the calculator, and has it."""
    solver = "You are the solver."
    if calculator:
        solver += " Use the calculator.\n    tools: [calculator]"
    return f"""
entry: solve_then_check
agents:
  solve_then_check:
    kind: pipeline
    description: Solves, then checks.
    stages:
      - {{agent: solver, name: solve, task: "{{task}}", output: solution}}
      - {{agent: checker, name: check, task: "Check: {{solution}}", output: review}}
    answer: solution
  solver:
    instructions: {solver}
  checker:
    instructions: You are the checker.
"""
