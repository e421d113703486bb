"""vtaforge.hw"""
