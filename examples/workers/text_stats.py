"""Text statistics for the writer agent: bound in workers/writer.yaml as
``text_stats:word_count`` and found next to that spec file."""


def word_count(text: str) -> int:
    """Count the words of a text.

    Args:
        text: The text to count the words of.
    """
    return len(text.split())
