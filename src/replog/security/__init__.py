"""Listeners' security that needs no I/O of its own: the SCRAM credential maths (scram.py),
which the admin side (credentials in the store), the CLI and a SASL server share; Kafka's
`sasl.jaas.config` values (jaas.py); and the SASL mechanisms' servers (sasl.py says what one is;
plain.py, scram_exchange.py; sasl_mechanisms.py names them), each fed by the broker with what it
looks up (SCRAM credentials through an injected callable).

Below admin/ in the layers, so that admin/ and the CLI use it; kept light, since every `replog`
command imports it."""
