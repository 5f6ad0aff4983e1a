"""`log.logger`: the AVA SDK's logging set-up."""
__all__ = ["logger"]
