"""Where the AVA SDK had them: `utils.cmd` (the child process), `utils.uploader.Uploader`
(one file to Kodo) and `utils.fetcher.Fetcher` (downloads)."""
__all__ = ["cmd", "uploader", "fetcher"]
