"""The SGLang-native backend: ``/generate`` with its chat template and wire."""
