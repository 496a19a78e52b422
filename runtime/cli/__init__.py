"""The ``agentrt`` command line (runtime roof): every argument parser, the
entry point (``_main.main``) and what each command prints.
"""
