"""TorchTPU (`torch_tpu`, module `torch.tpu`) collection, read in the program."""
