"""vtaforge.dse"""
