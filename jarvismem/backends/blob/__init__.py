"""Blob storage backends behind one small protocol."""

from __future__ import annotations

from jarvismem.backends.blob.base import BlobStorage, BlobVersion, validate_blob_path
from jarvismem.backends.blob.local import LocalBlobStorage
from jarvismem.errors import ConfigError
from jarvismem.settings import Settings

__all__ = [
    "BlobStorage",
    "BlobVersion",
    "LocalBlobStorage",
    "create_blob_storage",
    "validate_blob_path",
]


def create_blob_storage(settings: Settings) -> BlobStorage | None:
    """The blob backend ``settings.storage_backend`` names, or ``None`` for ``none``.

    ``azure`` imports the Azure SDK only here, so the local backend works
    without the ``azure`` extra installed.
    """
    if settings.storage_backend == "local":
        return LocalBlobStorage(
            settings.storage_base_path,
            fsync_appends=settings.storage_fsync_appends,
            inline_append_max_bytes=settings.storage_inline_append_max_bytes,
        )
    if settings.storage_backend == "azure":
        if settings.azure_storage_connection_string is None:
            raise ConfigError(
                "AZURE_STORAGE_CONNECTION_STRING is required when STORAGE_BACKEND=azure"
            )
        # Lazy on purpose: the module needs the optional azure extra (and it is
        # slow to import), so jarvismem works without it unless azure is chosen.
        try:
            from jarvismem.backends.blob.azure import AzureBlobStorage
        except ImportError:
            # A missing extra is the installation's to fix: one line, exit 2 in
            # the CLI, instead of an ImportError taken for a bug.
            raise ConfigError(
                "the azure extra is not installed: pip install 'jarvismem[azure]' "
                "(STORAGE_BACKEND=azure needs it)"
            ) from None

        return AzureBlobStorage(
            settings.azure_storage_connection_string.get_secret_value(),
            settings.azure_storage_container,
        )
    return None
