"""`train.base.TrainInstance`, the AVA SDK's handle on one training."""
__all__ = ["base"]
