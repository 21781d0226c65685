"""nexus.kernels"""
