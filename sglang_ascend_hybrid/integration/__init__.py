"""SGLang backend classes, the attention-backend registry glue, and upstream hook functions."""
