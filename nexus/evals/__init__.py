"""nexus.evals"""
