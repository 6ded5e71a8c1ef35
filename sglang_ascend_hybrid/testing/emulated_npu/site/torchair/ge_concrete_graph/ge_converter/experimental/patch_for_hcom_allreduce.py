"""Imported by SGLang for its side effect on a real torchair; nothing to patch here."""
