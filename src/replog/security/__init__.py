"""Listeners' security that needs no I/O of its own: the SCRAM credential maths (scram.py),
which the admin side (credentials in the store), the CLI and a SASL server share.

Below admin/ in the layers, so that admin/ and the CLI use it; kept light, since every `replog`
command imports it."""
