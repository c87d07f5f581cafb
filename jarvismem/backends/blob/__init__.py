"""Blob storage backends behind one small protocol."""

from jarvismem.backends.blob.base import BlobStorage, BlobVersion, validate_blob_path

__all__ = ["BlobStorage", "BlobVersion", "validate_blob_path"]
