"""nexus.agent"""
