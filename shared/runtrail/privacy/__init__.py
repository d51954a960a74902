"""Protected content by reference, crypto-shredding and retention (``docs/PRIVACY.md``).

One module per job:

* :mod:`.reference` — the reference an event carries in place of content, and the erased marker;
* :mod:`.field_classes` — which event fields hold which class of content;
* :mod:`.sealing` — AES-256-GCM for content and for data keys;
* :mod:`.keys` — data keys per (tenant, subject) wrapped by a tenant key (the KMS seam);
  :mod:`.keys_file` — the embedded key store (0600 files);
* :mod:`.content_store` — the content-store interface; adapters :mod:`.content_file`,
  :mod:`.content_object` (obstore), :mod:`.content_postgres`, opened by URL through
  :data:`runtrail.persistence.PROTECTED_CONTENT`;
* :mod:`.vault` — sealing into the store, opening a reference, erasing a subject;
* :mod:`.policy` — what goes by reference, per tenant and class, and whose key seals it;
* :mod:`.protect` — the publisher's hook replacing protected fields by references;
* :mod:`.resolve` — readers opening references (erased: the marker);
* :mod:`.erasure`, :mod:`.run_end` — erasing and recording it in the run's history;
* :mod:`.retention` — pruning by age or count, per store.
"""
