"""Backends: how bytes are stored (blob storage, Redis connections, HTTP clients).

A backend never imports a tier.
"""
