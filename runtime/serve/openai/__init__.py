"""The daemon's OpenAI-compatible endpoints: chat completions and Responses."""
