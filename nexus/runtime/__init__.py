"""nexus.runtime"""
