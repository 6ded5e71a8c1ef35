"""Test helpers shared by every test folder: call and sync counters, the op log, the older-release subset,
a one-word ladder signature, the fresh patch-application state and seam lookups (fresh_state)."""
