"""Certificates replaced without a restart, as Kafka's dynamic ssl.keystore.location update: an
SSL listener's keystore and truststore files are looked at (their stat: inode, size, mtime)
every CHECK_INTERVAL_S; when one changed, a new TLS context is built from them and serves the
connections accepted after, while those already open go on with theirs. One INFO line says
which certificate now serves (subject, notAfter) and the expiry gauge follows it.

A file caught half-written, or replaced by one that does not load, leaves the listener serving
the certificate it had: one WARNING per change seen, and the next change is tried again. The
work is bounded: a few stat calls per SSL listener per interval, and a context built only on a
change.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import ssl
from collections.abc import Callable, Mapping
from typing import Any

from replog import tls_settings

from .tls import TlsSettingsError, served_certificate, server_context

logger = logging.getLogger(__name__)

CHECK_INTERVAL_S = 5.0

Stamp = tuple[tuple[int, int, int] | None, ...]


class CertificateWatch:
    """One SSL listener's files: `check` swaps in a new context through `serve` when they changed."""

    def __init__(self, settings: Mapping[str, Any], listener: str, serve: Callable[[ssl.SSLContext], None],
                 certificate_loaded: Callable[[str, float], None]):
        values = tls_settings.settings_of(settings, listener)
        self._settings = settings
        self.listener = listener
        self._files = [path for path in (values["ssl.keystore.location"], values["ssl.truststore.location"]) if path]
        self._serve = serve
        self._certificate_loaded = certificate_loaded
        # Taken before the first context is built: a change during that build is seen by the next check.
        self._stamp = self._stamp_now()

    def loaded(self) -> None:
        """The listener's first context is serving: export its certificate's expiry."""
        self._certificate_loaded(self.listener, served_certificate(self._settings, self.listener)[1])

    def _stamp_now(self) -> Stamp:
        stamps = []
        for path in self._files:  # at most two
            try:
                found = os.stat(path)
                stamps.append((found.st_ino, found.st_size, found.st_mtime_ns))
            except OSError:
                stamps.append(None)  # being replaced: a later check sees the new one
        return tuple(stamps)

    def check(self) -> bool:
        """Whether a changed file was loaded and now serves new connections."""
        stamp = self._stamp_now()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            context = server_context(self._settings, self.listener)
            subject, not_after_s = served_certificate(self._settings, self.listener)
        except TlsSettingsError as error:
            logger.warning("changed TLS files not loaded, the listener keeps serving its certificate listener=%s "
                           "error=%s", self.listener, error)
            return False
        self._serve(context)
        self._certificate_loaded(self.listener, not_after_s)
        logger.info("TLS certificate reloaded; new connections get it listener=%s subject=%s not_after=%s",
                    self.listener, subject,
                    datetime.datetime.fromtimestamp(not_after_s, datetime.timezone.utc).isoformat())
        return True


async def watch(watches: list[CertificateWatch]) -> None:
    """Check every watch each CHECK_INTERVAL_S, until cancelled."""
    while True:
        await asyncio.sleep(CHECK_INTERVAL_S)
        for certificate_watch in watches:  # one per SSL listener
            certificate_watch.check()
