"""nexus.sandbox"""
