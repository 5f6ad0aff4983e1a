"""`utils.cmd` (the child process), `utils.uploader.Uploader` and `utils.fetcher.Fetcher` (Kodo upload, download), where the AVA SDK had them."""
__all__ = ["cmd", "uploader", "fetcher"]
