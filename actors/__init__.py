"""cairn's runtime: the host, its session, compactor and provider actors, and their pure policies.

The layers import one way only: host -> session -> compactor -> provider,
with shared leaves (`errors`, `tokens`, `tools`, `workspace_fs`,
`placement`) that import none of them (checked by tests/test_layers.py).
What a host needs is re-exported by the package `cairn`.
"""
