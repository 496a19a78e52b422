"""The embedded backend: a GGUF model in-process through llama.cpp."""
