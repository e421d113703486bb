"""vtaforge.compiler"""
