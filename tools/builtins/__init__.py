"""Built-in tools: a safe calculator, file reading confined to a root
directory, and the sandboxed ones: Python, shell and editor.

Imports the runtime floor and the tools layer; never agents or aggregators.
"""
