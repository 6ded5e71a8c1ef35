"""The launch defaults: what the plugin declares (or refuses) during SGLang's startup resolution on NPU,
one module per job; nothing is re-exported, import from the owning module.

* :mod:`.decision` -- the pure decision (:func:`~.decision.decide` on :class:`~.decision.LaunchFacts`),
  its messages and why it is what it is;
* :mod:`.planned` -- the same decision from a config.json, without SGLang running (``plan``);
* :mod:`.extra_buffer` -- SGLang's extra_buffer support: its list read from the installed source, its
  checks on the live release, and the plugin's gate hook around them;
* :mod:`.resolution` -- reading the live ServerArgs record and applying the decision (the resolution hook);
* :mod:`.registration` -- whether and where the launch hooks are registered (the patch registry's entry).
"""
