"""vtaforge.hw.core"""
