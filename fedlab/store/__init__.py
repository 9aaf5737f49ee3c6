"""Support of the results store (:mod:`fedlab.results`): atomic durable writes
(:mod:`~fedlab.store.atomic`), the digest of the numeric-path code in the run key
(:mod:`~fedlab.store.code_digest`) and per-client state on disk (:mod:`~fedlab.store.client_states`). They sit below :mod:`fedlab.config` and :mod:`fedlab.results`,
which import them, and import nothing of fedlab themselves.
"""
